"""Write a synthetic traffic video and its ground truth (``<stem>.gt.csv``, see source_code.scenes).

Example: ``python source_code/make_video.py --out reports/clip.mp4 --seconds 5 --seed 7``
"""
from __future__ import annotations

import argparse
import sys
import time

from source_code.scenes import SceneConfig, make_video


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output video path (.mp4 -> mp4v)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0, help="scene seed (training uses seeds >= 100000)")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--density", type=float, default=1.0, help="traffic density multiplier")
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.width < 64 or a.height < 64 or a.fps <= 0 or a.density < 0:
        print("make_video: --seconds and --fps must be > 0, --width/--height >= 64, --density >= 0", file=sys.stderr)
        return 2
    t = time.perf_counter()
    try:
        video, gt = make_video(a.out, seconds=a.seconds,
                               config=SceneConfig(seed=a.seed, width=a.width, height=a.height, fps=a.fps,
                                                  density=a.density))
    except (RuntimeError, OSError) as e:
        print(f"make_video: {e}", file=sys.stderr)
        return 1
    print(f"wrote {video} and {gt} in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
