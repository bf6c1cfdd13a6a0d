"""The PyTorch runner of seqbench (suites/pytorch/).

Only timing.py, environment.py's probe, parity.py and the families' build functions touch torch
or numpy, and they import them lazily: everything else (the experiment list, the mapping, the
statistics, the report) runs and is tested without either.
"""
