"""The GPU kit (`make gpu-kit`, `make wheelhouse`), made online for a GPU machine without internet.

    kit.py       the wheels that machine lacks (`pip download`), the project, gpu-kit.sh, KIT.json
    __main__.py  the command line (`python -m coursetools.gpukit --help`)

What runs there, the offline set-up included, is coursetools.gpurun's."""
