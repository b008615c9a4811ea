"""`python -m uopc.bench gemm|peak|attention|gpt`: the benchmark harness's command line (uopc/bench/__init__.py)."""
from uopc.bench import main

main()
