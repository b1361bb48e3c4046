"""The course's tools: grading a class, the GPU runner, generating notebooks, keeping the pins.

Importing this package imports nothing: the GPU runner's preflight runs on the standard library
alone.
"""
