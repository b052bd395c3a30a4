"""What every CPU benchmark in bench/ shares: the A B A B harness (sides.py), the measured GEMM
peak (gemm.py) and the workload pieces (workload.py)."""
