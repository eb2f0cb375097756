"""The failed rank profile_ranks names is the root cause, not a peer that lost its connection."""
from labkit.ranks.profile import is_consequence, root_cause_first

# Lines as ranks wrote them in real failed runs (gloo on CPU; NCCL's watchdog; torchrun's stop).
GLOO_TIMEOUT = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv operation to complete"
GLOO_PEER = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
             "[127.0.0.1]:43211")
OWN = "RuntimeError: rank 1 failed on purpose (RANKS_FAIL_RANK)"
NCCL = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "remote process exited or there was a network error")
WATCHDOG = "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out."


def test_a_peers_closed_connection_is_a_consequence():
    assert is_consequence(GLOO_PEER) and is_consequence(NCCL) and is_consequence(WATCHDOG)
    assert is_consequence(GLOO_TIMEOUT)
    assert not is_consequence(OWN)
    assert not is_consequence("ValueError: bad input shape (3, 4)")


def test_the_rank_with_its_own_error_is_named_first_whatever_torchrun_listed_first():
    # torchrun listed rank 0 as "Root Cause" (both failures noticed in one poll): rank 1 is named
    assert root_cause_first([0, 1], {0: GLOO_PEER, 1: OWN}) == [1, 0]
    assert root_cause_first([1, 0], {0: GLOO_PEER, 1: OWN}) == [1, 0]
    # two errors of their own: torchrun's order stands
    assert root_cause_first([1, 0], {0: "ValueError: a", 1: "KeyError: b"}) == [1, 0]
    # only consequences: torchrun's order stands
    assert root_cause_first([0, 1], {0: GLOO_PEER, 1: NCCL}) == [0, 1]
