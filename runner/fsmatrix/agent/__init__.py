"""The guest agent: prepare storage, run one workload, measure, verify, write the result.

Everything under ``fsmatrix.agent`` imports only the Python standard library: the same code runs
on the host backend and inside the guest image, which has Debian's python3 and nothing else.
"""
