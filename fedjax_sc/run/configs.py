"""Per-scene defaults: the paper's settings (Li et al. 2021, Sec. 5.1-5.2) and a quick synthetic one.

Every field can be overridden on the command line; a value the user does not give is taken
from the scene's preset. How to run each:

* FDU (16 clients, paper Table 2 setting, GloVe 50d as shipped here)::

      fedjax-sc train --scene fdu --data-dir ../shared/data/fdu-mtl --embeddings glove-6b-50d \\
          --out runs/fdu-fedavg

* IYY (3 clients; Tang et al. 2015 files in --data-dir)::

      fedjax-sc train --scene iyy --data-dir /path/to/iyy --out runs/iyy-fedavg

* synthetic (built in, seconds on a laptop CPU)::

      fedjax-sc train --scene synthetic --out runs/quickstart
"""

from __future__ import annotations

SCENE_DEFAULTS: dict[str, dict[str, float | int]] = {
    # Sec. 5.1-5.2: L = 200, batch 8, LR 0.01, 2 local epochs, 50 rounds.
    "fdu": {"rounds": 50, "batch_size": 8, "lr": 0.01, "max_len": 200},
    # Sec. 5.1-5.2: L = 400, batch 64, LR 0.1, 20 rounds.
    "iyy": {"rounds": 20, "batch_size": 64, "lr": 0.1, "max_len": 400},
    # Built-in scene (fedjax_sc.data.scenes.synthetic_scene): small and fast. LR 0.1 because
    # its randomly initialised embeddings need larger steps than GloVe-initialised ones.
    "synthetic": {"rounds": 10, "batch_size": 8, "lr": 0.1, "max_len": 48},
}

NUM_CLASSES = {"fdu": 2, "iyy": 5, "synthetic": 2}
"""C per scene (binary sentiment; IYY's 1-5 stars)."""

EMBED_DIM = {"random": 200, "glove-6b-50d": 50}
"""Embedding size d per initialisation: 200 as the paper; 50 for the GloVe 6B 50d vectors."""
