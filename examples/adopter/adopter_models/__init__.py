"""The example team's models (examples/adopter: a repository that adopts cl_validate)."""
