"""Every random stream of a run, listed in one place.

A run has one root seed. JAX keys: ``root = jax.random.key(seed)`` is split into the model's
initial parameters and the training key; round r uses ``fold_in(training key, r)``, client k
``fold_in(round key, k)``, its epoch e ``fold_in(client key, e)`` (example i's place in the
epoch's shuffle from ``fold_in(epoch key, i)``) and the loss of its step j
``fold_in(fold_in(epoch key, STEP), j)``. The constants below separate the other streams
from those (``jax.random.fold_in(parent, STREAM)``) so that no two consumers ever share a
key. NumPy generators (host-side data work) are seeded
with ``np.random.default_rng([seed, STREAM, ...])``.
"""

# JAX streams: fold_in constants, with the key they are folded into
UPLOAD = 2**31 - 1
"""round key -> the clients' upload keys (KTEPS*'s noise):
``fold_in(fold_in(round, UPLOAD), k)``."""
AP = 2**31 - 2
"""root key -> the Ap phase (fine-tuning shuffles): ``fold_in(fold_in(root, AP), k)``."""
KNOWLEDGE = 2**31 - 3
"""round key -> the knowledge exchange (FedKC's K-Means starts): ``fold_in(.., k)`` per client."""
WORK = 2**31 - 4
"""round key -> the clients' local work (budgets, stragglers, dropout;
:mod:`fedjax_sc.core.heterogeneity`), drawn once per round for all clients."""
STEP = 2**31 - 5
"""an epoch's key -> its local steps' loss keys: ``fold_in(fold_in(epoch, STEP), j)`` for
step j (apart from the epoch's shuffle, which folds in the example indices)."""
DP_NOISE = 2**31 - 2
"""a local step's key -> DP-SGD's Gaussian noise (a step key's own consumers use other
constants; the value equals :data:`AP` but the parents differ)."""



def multitask_interleave(num_clients: int) -> int:
    """round key -> the alternate multi-task schedule's interleaving of the domains' batches
    (ASP, :mod:`fedjax_sc.core.multitask`): ``fold_in(fold_in(round, 1 + K), e)`` for epoch
    e, K the clients, beyond the client indices 0..K-1."""
    return 1 + num_clients


# NumPy streams: the second entry of the generator's seed sequence
SAMPLING = 7
"""``[seed, SAMPLING, round]``: the clients sampled in a round (partial participation)."""
PARTITION_SPLITS = {"train": 1, "test": 2, "dev": 3}
"""``[partition seed, PARTITION_SPLITS[split]]``: a Dirichlet partition's per-split draws;
any other split name uses :data:`PARTITION_OTHER`."""
PARTITION_OTHER = 4
