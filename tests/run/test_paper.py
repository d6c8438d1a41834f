"""The paper's figures as data: internal consistency and spot checks against the PDF."""

from __future__ import annotations

import pytest

from fedjax_sc.run.paper import TABLE2, TABLE3, TABLE4, TABLE5, TABLE6, TABLE7, TABLE8, paper_value

FDU = ["apparel", "baby", "books", "camera_photo", "dvd", "electronics", "health_personal_care",
       "kitchen_housewares", "magazines", "music", "software", "sports_outdoors", "toys_games",
       "video", "imdb", "MR"]
IYY = ["imdb", "yelp13", "yelp14"]
METHODS = {
    "TABLE2": ["indiv", "fs", "asp", "fedavg", "fedfusion", "pfl_da", "fedprox", "fedmmd",
               "kteps", "kteps_star"],
    "TABLE3": ["indiv", "fs", "asp", "fedavg", "fedper", "lg_fedavg", "fedfusion", "pfl_da",
               "fedprox", "fedmmd", "kteps", "kteps_star"],
}
TABLES = {"TABLE2": TABLE2, "TABLE3": TABLE3}
# Every printed Avg is within rounding of its client mean (largest gap 0.07): no (table,
# scene, method) needs to be excused. Add pairs here, with both numbers, if one ever does.
KNOWN_AVG_MISMATCHES: set[tuple[str, str, str]] = set()
# The IYY Avg rows of Tables 2 and 3 print one number fewer than there are methods; matching
# the printed numbers with the client means shows KTEPS*'s is the one missing.
MISSING_AVG = {("TABLE2", "iyy", "kteps_star"), ("TABLE3", "iyy", "kteps_star")}

CASES = [(t, s, m) for t in TABLES for s in ("fdu", "iyy") for m in METHODS[t]]


@pytest.mark.parametrize("table,scene,method", CASES)
def test_avg_is_client_mean(table, scene, method):
    values = TABLES[table][scene][method]
    clients = FDU if scene == "fdu" else IYY
    mean = sum(values[c] for c in clients) / len(clients)
    if (table, scene, method) in MISSING_AVG:
        assert "Avg" not in values
        return
    if (table, scene, method) in KNOWN_AVG_MISMATCHES:
        pytest.xfail(f"paper prints Avg {values['Avg']}, client mean {mean:.2f}")
    assert abs(values["Avg"] - mean) <= 0.15, (values["Avg"], mean)


@pytest.mark.parametrize("table", list(TABLES))
def test_methods_and_clients(table):
    for scene, clients in (("fdu", FDU), ("iyy", IYY)):
        assert list(TABLES[table][scene]) == METHODS[table]
        for method, values in TABLES[table][scene].items():
            has_avg = (table, scene, method) not in MISSING_AVG
            assert set(values) == set(clients) | ({"Avg"} if has_avg else set())
            assert [c for c in values if c != "Avg"] == clients


def test_spot_checks():
    assert TABLE2["fdu"]["kteps"]["Avg"] == 85.7
    assert TABLE2["fdu"]["indiv"]["magazines"] == 89.6
    assert TABLE2["iyy"]["fedavg"]["Avg"] == 59.1
    assert TABLE2["iyy"]["kteps"]["Avg"] == 59.7
    assert TABLE2["fdu"]["kteps_star"]["MR"] == 65.9
    assert TABLE3["fdu"]["fedper"]["apparel"] == 87.2
    assert TABLE3["fdu"]["lg_fedavg"]["magazines"] == 91.2
    assert TABLE3["iyy"]["fedmmd"]["Avg"] == 57.0
    assert TABLE4["fdu"]["Ag"][0.001][0.0] == 85.5
    assert TABLE4["iyy"]["Ap"][0.01][0.01] == 60.3
    assert TABLE5["iyy"]["kteps"][1.0] == 44.5
    assert TABLE5["fdu"]["kteps_star"][0.001] == 83.5
    assert TABLE6["fdu"]["kteps_star"]["s"] == 83.0
    assert TABLE6["iyy"]["kteps"]["p"] == 60.2
    assert TABLE8["fdu"]["Ap"][0.1]["arch_c"] == 82.1
    assert TABLE8["fdu"]["Ag"][0.001]["arch_a"] == 85.6


def test_grid_shapes():
    lambdas = [0.0, 0.001, 0.01]
    for scene in ("fdu", "iyy"):
        for metric in ("Ag", "Ap"):
            assert list(TABLE4[scene][metric]) == lambdas
            assert all(list(row) == lambdas for row in TABLE4[scene][metric].values())
        assert all(list(v) == [1.0, 0.1, 0.01, 0.001] for v in TABLE5[scene].values())
        assert all(list(v) == ["s", "p", "sp"] for v in TABLE6[scene].values())
    for metric in ("Ag", "Ap"):
        assert list(TABLE8["fdu"][metric]) == [0.0, 0.001, 0.01, 0.1]
        assert all(list(v) == ["arch_a", "arch_b", "arch_c"]
                   for v in TABLE8["fdu"][metric].values())


def test_cross_table_consistency():
    """KTEPS (lambda1 = lambda2 = 0.01, mu = 0.01, "sp", d1 = 1, d2 = d) is one run that
    Tables 2-7 all report."""
    for scene in ("fdu", "iyy"):
        ag, ap = TABLE2[scene]["kteps"]["Avg"], TABLE3[scene]["kteps"]["Avg"]
        assert TABLE4[scene]["Ag"][0.01][0.01] == ag == TABLE7[scene]["Ag"][1.0][1]
        assert TABLE4[scene]["Ap"][0.01][0.01] == ap == TABLE7[scene]["Ap"][1.0][1]
        assert TABLE5[scene]["kteps"][0.01] == ap == TABLE6[scene]["kteps"]["sp"]
    kteps_star_ap = TABLE3["fdu"]["kteps_star"]["Avg"]
    assert TABLE5["fdu"]["kteps_star"][0.01] == kteps_star_ap == TABLE6["fdu"]["kteps_star"]["sp"]


def test_paper_value():
    assert paper_value("TABLE2", "fdu", "kteps", "Avg") == 85.7
    assert paper_value("Ap", "fdu", "fedper", "apparel") == 87.2
    assert paper_value("table3", "iyy", "lg_fedavg", "imdb") == 60.0
    assert paper_value("TABLE2", "fdu", "fedper", "apparel") is None  # no global model
    assert paper_value("TABLE2", "iyy", "kteps_star", "Avg") is None  # not printed
    assert paper_value("TABLE3", "fdu", "kteps", "nope") is None
    assert paper_value("TABLE3", "nope", "kteps", "Avg") is None
    with pytest.raises(ValueError, match="TABLE9"):
        paper_value("TABLE9", "fdu", "kteps", "Avg")
