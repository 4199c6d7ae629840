"""Test support shared by the unit tests, the e2e tests and the demo: the API server's
object rules (`apiserver`), label selectors (`selectors`) and fault injection (`faults`)
behind the fake API server of tests/fakekube.py.

Imports only `trainwarden.api` and `trainwarden.core`: nothing here does I/O.
"""
