"""The GPU runner (`make test-gpu`): a verdict on a CUDA machine, within a budget.

    preflight.py  the machine's problems and gaps, said as the machine's, with the fix
    gpustate.py   the GPU's state before and after (utilisation, clocks, power, processes, MIG)
    wheels.py     the offline set-up: what the suite lacks, added beside the machine's PyTorch
    steps.py      a lesson under nbval with its claims file, a grading run, the gpu tests
    catalogue.py  the claims the lessons make, so the report names those that did not run
    report.py     the report as data, rule by rule; render.py: its Markdown
    run.py        the command line, the budget, the record (`python -m coursetools.gpurun --help`)

The kit for a machine without internet is made online, by coursetools.gpukit. Importing this
package imports nothing: `--preflight` runs before anything is installed."""
