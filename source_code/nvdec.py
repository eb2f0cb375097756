"""``--decode nvdec``: the GPU's video decoder (NVDEC) through PyNvVideoCodec, decoding straight
into device memory, so no frame is decoded by a CPU nor copied up for the detector.

``require_nvdec(device)`` runs before anything else (as the TensorRT backend's import does): a
missing PyNvVideoCodec, a driver without ``libnvcuvid`` or a CPU device is one line naming the
fix. ``NvdecSource`` has ``VideoSource``'s interface; its frames are CUDA uint8 (H, W, 3) BGR
tensors (the channel order of OpenCV's frames, which every stage expects). ``--gpu-preprocess``
then stacks them on the device; the OSD and the output video copy a frame to the host only when
they draw or write it (``source_code.stages.Display``). Pages read:
  https://docs.nvidia.com/video-technologies/pynvvideocodec/pynvc-api-reference/decoder.html
    (SimpleDecoder(enc_file_path, gpu_id, use_device_memory, output_color_type); len(); get_batch_frames(n))
  https://docs.nvidia.com/video-technologies/pynvvideocodec/pynvc-api-prog-guide/using_pynvvideocodec_apis.html
    (interoperability: decoded frames expose __dlpack__, read with torch.from_dlpack without a copy)
"""
from __future__ import annotations

import ctypes

from source_code.errors import EXIT_UNAVAILABLE, PipelineError
from source_code.sources import VideoSource

PIP = "pip install PyNvVideoCodec==2.2.4"
NVCUVID = "libnvcuvid.so.1"
"""The driver's NVDEC library (part of the NVIDIA driver, not of CUDA or of the wheel)."""


def require_nvdec(device, *, load=ctypes.CDLL):
    """The ``PyNvVideoCodec`` module, or PipelineError (exit 3) in one line naming what is missing
    and the fix: a CUDA device, the driver's ``libnvcuvid``, the module itself.

    Args:
        device: the run's torch device.
        load: how a shared library is opened (``ctypes.CDLL``).
    """
    if device.type != "cuda":
        raise PipelineError("--decode nvdec decodes on the GPU: run with --device cuda, or use --decode cpu",
                            EXIT_UNAVAILABLE)
    try:
        load(NVCUVID)
    except OSError as exc:
        raise PipelineError(f"--decode nvdec needs the NVIDIA driver's {NVCUVID} ({exc}): install the driver's "
                            "video decode library (a container needs NVIDIA_DRIVER_CAPABILITIES to include video), "
                            "or use --decode cpu", EXIT_UNAVAILABLE) from None
    try:
        import PyNvVideoCodec as nvc
    except Exception as exc:  # ImportError, or a wheel that fails to load its libraries
        raise PipelineError(f"--decode nvdec needs PyNvVideoCodec ({type(exc).__name__}: {exc}): {PIP}, or use "
                            "--decode cpu", EXIT_UNAVAILABLE) from None
    return nvc


class NvdecSource(VideoSource):
    """One video file decoded by NVDEC into device memory; ``read()`` returns a frame or None at the
    end (``VideoSource``'s reading, pacing and counting, over this decoder).

    Args:
        path: the file (a container with an index: SimpleDecoder seeks).
        index: the stream's index.
        max_frames: at most this many frames (``--frames``), or None.
        realtime: release frame i no earlier than i / fps after the first.
        device: the CUDA device that decodes (its index is the decoder's ``gpu_id``).
    """

    def __init__(self, path: str, *, index: int, max_frames: int | None, realtime: bool = False,
                 device=None):  # VideoSource.__init__ opens OpenCV's decoder: not called
        import torch

        nvc = require_nvdec(device)
        self.torch = torch
        self.path, self.index, self.max_frames, self.realtime = path, index, max_frames, realtime
        gpu = device.index if device.index is not None else torch.cuda.current_device()
        try:
            self.decoder = nvc.SimpleDecoder(str(path), gpu_id=gpu, use_device_memory=True,
                                             output_color_type=nvc.OutputColorType.RGB)
        except Exception as exc:  # noqa: BLE001 - the library's own error, in one line
            raise PipelineError(f"NVDEC cannot open {path}: {' '.join(str(exc).split())} (a codec this GPU's "
                                "decoder lacks? try --decode cpu)") from None
        self.declared = len(self.decoder)
        meta = self.decoder.get_stream_metadata()
        fps = float(getattr(meta, "average_fps", 0) or 0)
        self.fps = fps if 0 < fps < 1000 else 30.0
        self.count, self.ended, self.error, self.t_first = 0, False, None, None
        self._pending = self._decode()  # decoded now: an undecodable file fails before the model loads
        if self._pending is None:
            raise PipelineError(f"{path} has no frames NVDEC can decode (empty, damaged or truncated video)")
        self.height, self.width = (int(v) for v in self._pending.shape[:2])

    def _decode(self):
        try:
            frames = self.decoder.get_batch_frames(1)
        except Exception as exc:  # noqa: BLE001 - a damaged stream ends it, as OpenCV's does
            self.error = " ".join(str(exc).split())
            return None
        if not frames:
            return None
        rgb = self.torch.from_dlpack(frames[0])  # (H, W, 3) on the device, no copy
        return rgb.flip(-1).contiguous()  # BGR, as OpenCV's frames: the stages flip it back once

    def close(self) -> None:
        self.decoder = None
