"""`python -m uopc.bench gemm|peak|attention|gpt|conv`: the harness's command line (uopc/bench/__init__.py)."""
from uopc.bench import main

main()
