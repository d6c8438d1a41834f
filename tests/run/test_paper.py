"""The paper's figures as data: internal consistency and spot checks against the PDF."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedjax_sc.run.paper.tables import (
    TABLE2,
    TABLE3,
    TABLE4,
    TABLE5,
    TABLE6,
    TABLE7,
    TABLE8,
    paper_value,
)

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


# --- against the paper's own text (when ../shared/seeds holds it) ---------------------------

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
TITLE = "Preliminary Steps Towards Federated Sentiment Classification"
CLIENT_OF = {"Apparel": "apparel", "Baby": "baby", "Books": "books", "Camera": "camera_photo",
             "DVD": "dvd", "Elec.": "electronics", "Health": "health_personal_care",
             "Kitchen": "kitchen_housewares", "Mag.": "magazines", "Music": "music",
             "Soft.": "software", "Sports": "sports_outdoors", "Toys": "toys_games",
             "Video": "video", "Imdb": "imdb", "MR": "MR", "Yelp13": "yelp13",
             "Yelp14": "yelp14", "Avg": "Avg"}


@pytest.fixture(scope="module")
def tables():
    """``{n: [[cells...] per tab-separated line]}`` of the paper's Tables 2-8, from the text
    of the paper (found by its title); skips when it is absent."""
    texts = [f.read_text(errors="replace") for f in sorted(SEEDS.glob("*.txt"))]
    text = next((t for t in texts if TITLE in t[:300]), None)
    if text is None:
        pytest.skip(f"the paper's text is not in {SEEDS}")
    out, current = {}, None
    for line in text.splitlines():
        caption = re.match(r"Table (\d): ", line)
        if caption:
            current = int(caption.group(1))
            out[current] = []
        elif current and "\t" in line:
            out[current].append([c.strip() for c in line.split("\t")])
        elif current and line.strip() and len(line) > 200:  # prose: the table has ended
            current = None
    return out


def numbers(cells):
    return [float(c) for c in cells if re.fullmatch(r"\d+\.\d", c)]


@pytest.mark.parametrize("n,ours,methods", [(2, TABLE2, METHODS["TABLE2"]),
                                            (3, TABLE3, METHODS["TABLE3"])])
def test_tables_2_3_equal_the_papers_text_cell_by_cell(tables, n, ours, methods):
    scene, seen = None, 0
    for cells in tables[n]:
        if cells[0] in ("FDU", "IYY"):
            scene = cells[0].lower()
        name = next((c for c in cells if c in CLIENT_OF), None)
        if name is None:
            continue
        values = numbers(cells)
        expected = {m: ours[scene][m][CLIENT_OF[name]] for m in methods
                    if CLIENT_OF[name] in ours[scene][m]}
        assert values == list(expected.values()), (scene, name)
        seen += 1
    assert seen == 16 + 1 + 3 + 1


def test_tables_4_to_8_equal_the_papers_text(tables):
    grid = [numbers(c)[-6:] for c in tables[4] if len(numbers(c)) >= 6]  # after lambda1
    for i, (scene, l1) in enumerate((s, l) for s in ("fdu", "iyy") for l in (0.0, 0.001, 0.01)):
        assert grid[i] == [TABLE4[scene][m][l1][l2] for m in ("Ag", "Ap")
                           for l2 in (0.0, 0.001, 0.01)]
    rows5 = {c[0]: numbers(c) for c in tables[5] if c[0] in ("FDU", "IYY")}
    for scene in ("fdu", "iyy"):
        assert rows5[scene.upper()] == [TABLE5[scene][m][mu] for m in ("kteps", "kteps_star")
                                        for mu in (1.0, 0.1, 0.01, 0.001)]
    rows6 = [numbers(c) for c in tables[6] if len(numbers(c)) == 6]
    assert rows6 == [[TABLE6[s][m][w] for m in ("kteps", "kteps_star") for w in ("s", "p", "sp")]
                     for s in ("fdu", "iyy")]
    rows7 = [numbers(c) for c in tables[7] if len(numbers(c)) == 8]
    assert rows7 == [[TABLE7[s][m][f][d1] for m in ("Ag", "Ap") for d1 in (1, 2, 3, 6)]
                     for s in ("fdu", "iyy") for f in (1.0, 0.75)]
    rows8 = [numbers(c)[-6:] for c in tables[8] if len(numbers(c)) >= 6]  # after lambda1
    assert rows8 == [[TABLE8["fdu"][m][l1][a] for m in ("Ag", "Ap")
                      for a in ("arch_a", "arch_b", "arch_c")] for l1 in (0.0, 0.001, 0.01, 0.1)]


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
