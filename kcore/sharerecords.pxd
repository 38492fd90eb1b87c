# cimport interface of kcore.sharerecords: none; share_records is called from Python
# (its typing is in sharerecords.pyi).
