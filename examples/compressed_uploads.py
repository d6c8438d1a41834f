"""FedAvg sending its model change compressed, as algorithms of one's own run by the CLI:

    fedjax-sc train --algorithm examples/compressed_uploads.py:top_tenth --scene synthetic
    fedjax-sc train --algorithm examples/compressed_uploads.py:four_bits --scene synthetic
    fedjax-sc train --algorithm examples/compressed_uploads.py:top_hundredth_remembered \
        --scene synthetic

Each client sends ``params - start`` (the model it downloaded), compressed: its tenth of
entries of largest magnitude per leaf (top-k sparsification, Aji and Heafield 2017), or every
entry in 4 bits by probabilistic quantization (Konecny et al. 2016, "Federated Learning:
Strategies for Improving Communication Efficiency"); the server adds the decoded change back
to the model it sent. The run's report counts the bytes sent (values and int32 indices; 4-bit
codes and two bounds). With error feedback each client keeps what its compressor dropped and
adds it to its next change (Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with Memory").
Any upload flag of the run (``--upload-noise``) is chained after.
"""

import fedjax_sc as fsc
from fedjax_sc.methods import error_feedback, model_change, probabilistic_quantization, top_k


def _fedavg(context, upload, name):
    model = context.text_classifier()
    algorithm = fsc.fedavg(model, context.learning_rate, momentum=context.momentum,
                           embedding_learning_rate=context.embedding_learning_rate)
    return algorithm._replace(name=name, upload=fsc.chain(model_change(), upload))


def top_tenth(context):
    """FedAvg uploading a tenth of its change (top-k, k = 10 % of each leaf's entries)."""
    return _fedavg(context, top_k(0.1), "fedavg_top10")


def top_hundredth(context):
    """FedAvg uploading a hundredth of its change."""
    return _fedavg(context, top_k(0.01), "fedavg_top1")


def four_bits(context):
    """FedAvg uploading its change quantized to 4 bits an entry."""
    return _fedavg(context, probabilistic_quantization(4), "fedavg_4bit")


def top_hundredth_remembered(context):
    """FedAvg uploading a hundredth of its change, each client carrying the rest over to its
    next round (error feedback): ``--upload-compression topk:0.01+ef``."""
    return _fedavg(context, error_feedback(top_k(0.01)), "fedavg_top1_ef")
