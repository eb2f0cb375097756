"""Many reports: one per rank of a run, each a task (here or on Dask), results together; ranks under torchrun."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "profile": ["profile_ranks", "RankFailedError"],
    "reports": ["load_reports", "plot_rank_timeline", "Reports", "RanksError", "rank_from_name", "FRAMES"],
    "cluster": ["run_tasks", "ClusterError"],
})
