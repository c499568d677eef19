"""The database servers the workloads drive: GT.M (``gtm``) and PostgreSQL (``postgres``).

Each module owns its settings block (``gtm.*``, ``postgres.*`` in a cell) and how to create, start,
stop, check and recover one database on the filesystem under test; the workloads use them.
"""
