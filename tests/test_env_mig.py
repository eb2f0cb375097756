"""labkit.env matches CUDA's devices to NVML's rows on a MIG slice too (real UUID forms)."""
from labkit.env import match_cuda_devices

GPU = "GPU-5d3a2f6c-8b1e-4c2a-9f0d-1e2b3c4d5e6f"
MIG1 = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"  # R470+ form, as nvidia-smi -L prints it
MIG2 = "MIG-0b7d7a1e-2b63-5a0f-8f0a-6a8e2a7c9d11"
OTHER = "GPU-aa11bb22-cc33-dd44-ee55-ff6677889900"


def rows():
    base = {"driver": "550.54.15", "cuda_driver": "12.4"}
    return [
        {**base, "index": 0, "uuid": GPU, "name": "NVIDIA H100 80GB HBM3"},
        {**base, "index": 0, "uuid": MIG1, "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "mig_index": 0,
         "parent_uuid": GPU},
        {**base, "index": 0, "uuid": MIG2, "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "mig_index": 1,
         "parent_uuid": GPU},
        {**base, "index": 1, "uuid": OTHER, "name": "NVIDIA H100 80GB HBM3"},
    ]


def test_torch_uuid_of_a_mig_instance_matches_its_nvml_row():
    # torch's _CudaDeviceProperties.uuid prints the instance's UUID without the MIG- prefix
    got = match_cuda_devices(rows(), visible=None, cuda_uuids=["0b7d7a1e-2b63-5a0f-8f0a-6a8e2a7c9d11"])
    assert [g["name"] for g in got] == ["NVIDIA H100 80GB HBM3 MIG 3g.40gb"]
    assert got[0]["cuda_index"] == 0 and got[0]["parent_uuid"] == GPU


def test_cuda_visible_devices_naming_a_mig_instance():
    got = match_cuda_devices(rows(), visible=MIG1, cuda_uuids=None)
    assert [g["uuid"] for g in got] == [MIG1]
    got = match_cuda_devices(rows(), visible=f"{MIG2},{OTHER}", cuda_uuids=None)
    assert [g["uuid"] for g in got] == [MIG2, OTHER]


def test_without_a_list_cuda_sees_instances_not_the_whole_gpu_in_mig_mode():
    got = match_cuda_devices(rows(), visible=None, cuda_uuids=None)
    assert GPU not in [g["uuid"] for g in got]
    assert [g["uuid"] for g in got] == [MIG1, MIG2, OTHER]
    # an index names the GPU in MIG mode's first instance
    assert [g["uuid"] for g in match_cuda_devices(rows(), visible="0", cuda_uuids=None)] == [MIG1]


def test_plain_gpus_still_match_with_and_without_prefix():
    got = match_cuda_devices(rows()[3:], visible=None, cuda_uuids=["aa11bb22-cc33-dd44-ee55-ff6677889900"])
    assert got[0]["uuid"] == OTHER
