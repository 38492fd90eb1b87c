# cython: language_level=3
"""Byte layout of Kafka record batches (v2) and legacy messages (v0/v1): field offsets,
sizes and attribute bits, named once.

The names are declared in layout.pxd as a cpdef enum, so compiled modules cimport them as C
constants and Python code reads the same values from this module.
"""
