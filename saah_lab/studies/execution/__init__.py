"""How a study's plan runs: :mod:`.runner` trains its jobs in order of their dependencies on :mod:`.engine` (Ray
core tasks, one machine or a cluster; :mod:`.watchdog` stops a local instance whose driver died), :mod:`.grid` is
the command over a whole study, :mod:`.timing` its stages' wall time and memory."""
