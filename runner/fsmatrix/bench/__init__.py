"""fsmatrix's own benchmarks (what fsmatrix costs and how well its statistics work), not the matrix:

- ``python -m fsmatrix.bench``: the host-backend micro benchmark (`make bench`);
- ``python -m fsmatrix.bench.gate``: the regression gate's false alarms and detections;
- ``python -m fsmatrix.bench.vm``: boot, per-run overhead and disk fidelity of the qemu backend (`make bench-vm`);
- ``python -m fsmatrix.bench.threen1_side_by_side``: 3n+1 next to the published program.
"""
