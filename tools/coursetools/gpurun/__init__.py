"""The GPU runner (`make test-gpu`, `make gpu-kit`): a verdict on a CUDA machine, in one command.

    preflight.py  the machine's problems, said as the machine's, with the fix (standard library)
    gpustate.py   the GPU's state before and after (utilisation, clocks, power, processes, MIG)
    wheels.py     what a GPU machine lacks: the wheelhouse, the offline set-up beside its PyTorch
    kit.py        the kit to carry there: the project, its wheels, gpu-kit.sh (the one command)
    runs.py       a lesson under nbval with its claims file; pytest, the doctor, the bench
    kernel_startup.py  each lesson kernel's start-up: claims recorded, never stopping a cell
    catalogue.py  the claims the lessons make, so the report names those that did not run
    needs.py      what a lesson's GPU path needs (TensorFlow, DALI, two GPUs, a compiler)
    report.py     the report as data, rule by rule; render.py: its Markdown
    run.py        the command line (`python -m coursetools.gpurun --help`)

Importing this package imports nothing: `--preflight` runs before anything is installed."""
