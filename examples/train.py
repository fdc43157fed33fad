"""Run the example training job from a checkout: `python examples/train.py --steps 100`.

The job itself lives in the package (`gpufleet.examples.train`) so that a worker, whose jobs
start in their own folder, can run it as `python -m gpufleet.examples.train`.
"""

import sys

from gpufleet.examples.train import main

if __name__ == "__main__":
    sys.exit(main())
