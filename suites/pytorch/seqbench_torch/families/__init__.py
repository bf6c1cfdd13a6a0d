"""Experiment families -> PyTorch: which module maps which experiments, chosen by name prefix.

An experiment's family is its name up to the first '/' ("layernorm_fwd", "adam"); it maps to the
module whose PREFIX (or one of whose PREFIXES) equals the family or starts it followed by '_'
("layernorm" takes "layernorm_fwd" and "layernorm_bwd"). No match: 'no torch equivalent'.
"""
from ..errors import Unmapped
from . import (bias_act_dropout, bias_dropout_residual, cross_entropy, dropout, embedding, layernorm, layers,
               optimizers, qkv_reshape, softmax)

# suite -> modules, most specific prefix first ("bias_act_dropout" before "dropout").
FAMILIES = {
    "operators": (layernorm, softmax, bias_act_dropout, bias_dropout_residual, dropout, cross_entropy, embedding,
                  qkv_reshape),
    "trainer": (optimizers,),
    # encoder_*, decoder_*, embedding_*, criterion_*; another layer (a GEMM epilogue, say) is
    # 'no torch equivalent' until it gets a mapping.
    "layers": (layers,),
}


def prefixes(module):
    return getattr(module, "PREFIXES", None) or (module.PREFIX,)


def module_for(suite, family):
    for module in FAMILIES.get(suite, ()):
        for prefix in prefixes(module):
            if family == prefix or family.startswith(prefix + "_"):
                return module
    return None


def plan_for(experiment):
    """The Plan of an experiment; Unmapped with the reason when there is none."""
    if experiment.suite not in FAMILIES:
        raise Unmapped(f"suite '{experiment.suite}' has no torch equivalent")
    module = module_for(experiment.suite, experiment.family)
    if module is None:
        raise Unmapped(f"no torch equivalent for family '{experiment.family}'")
    return module.plan(experiment)
