"""Driving a run: ``options`` (defined once for the CLI and the pytest plugin) · ``suite``
(validate, then judge every case × target) · ``workers`` (isolated worker processes, with
``messages`` between them) · ``measure`` and ``execute`` (what a worker does: compile, run)
· ``cache`` and ``sources`` (measurements keyed by everything they depend on) · ``shard``
(a CI job's share of the cases)."""
