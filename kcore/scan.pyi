"""Validation of record-batch bodies into position arrays (compiled).

C-level only (see scan.pxd): kcore.records drives it; nothing here is called from Python.
"""
