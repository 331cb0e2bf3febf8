"""Each committed policy shows itself: `policies/g1/<motion>/eval/` holds its eval summary (`eval.json`: `make eval`'s,
20 randomised episodes, seed 0, without the per-episode rows), a key-frame strip of episode 0
(`keyframes.png`: crouch, take-off, apex, touch-down, stand, at half the eval video's size) and that episode's
video (`video.webp`: the eval's gif at half its size and frame rate as lossy WebP; the reference is the translucent
ghost).

    python -m experiments.policy_cards                  # every policies/g1/<motion>/
    python -m experiments.policy_cards --motions jump   # one

Each eval runs as `python -m eval` in a subprocess (C MuJoCo, one core, ~1-3 min with the video); nothing here
imports jax.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "policies" / "g1"
EPISODES, SEED = 20, 0
DROP = ("per_episode", "plot", "video", "video_keyframes", "artifact", "policy", "seconds_per_episode")


def committed_motions(root: Path = ARTIFACTS) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "policy.yaml").is_file())


def card_summary(ev: dict) -> dict:
    """eval.json without what only makes sense beside its run folder (paths, per-episode rows, timing)."""
    return {k: v for k, v in ev.items() if k not in DROP}


def write_card(motion: str, run_dir: Path, dest: Path) -> None:
    ev = json.loads((run_dir / "eval.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "eval.json").write_text(json.dumps(card_summary(ev), indent=1, sort_keys=True) + "\n")
    strip = run_dir / "episode0_keyframes.png"
    if strip.is_file():
        small_strip(strip, dest / "keyframes.png")
    gif = run_dir / "episode0.gif"
    if gif.is_file():
        small_video(gif, dest / "video.webp")


def _half(img):
    """An image (or a gif's frame) as RGB at half its width and height."""
    from PIL import Image

    return img.convert("RGB").resize((img.width // 2, img.height // 2), Image.LANCZOS)


def small_strip(src: Path, dst: Path) -> Path:
    """An eval's key-frame strip at half its size as a palette PNG (~3x smaller again), for the repository."""
    from PIL import Image

    small = _half(Image.open(src))
    dst.parent.mkdir(parents=True, exist_ok=True)
    small.quantize(colors=256).save(dst, optimize=True)
    return dst


def small_video(src: Path, dst: Path, quality: int = 60) -> Path:
    """An eval's gif at half its size and half its frame rate (every other frame, each shown twice as long) as an
    animated lossy WebP (7.6 s of the dance: 0.38 MB where the gif is 13 MB)."""
    from PIL import Image, ImageSequence

    img = Image.open(src)
    period_ms = img.info.get("duration", 40)
    frames = [_half(f) for i, f in enumerate(ImageSequence.Iterator(img)) if i % 2 == 0]
    dst.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(dst, save_all=True, append_images=frames[1:], duration=2 * period_ms, loop=0, quality=quality,
                   method=4)
    return dst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--motions", nargs="+", default=None, help="default: every policies/g1/<motion>/")
    a = p.parse_args(argv)
    motions = a.motions or committed_motions()
    unknown = sorted(set(motions) - set(committed_motions()))
    if unknown:
        p.error(f"no policies/g1/<motion>/policy.yaml for {', '.join(unknown)} (have: {', '.join(committed_motions())})")
    for m in motions:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "eval", "--motion", m, "--episodes", str(EPISODES), "--seed", str(SEED),
                   "--out", tmp]
            r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"policy-cards: {m}: python -m eval exited {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}",
                      file=sys.stderr)
                return 1
            (run_dir,) = [d.parent for d in Path(tmp).glob(f"{m}/*/eval.json")]
            write_card(m, run_dir, ARTIFACTS / m / "eval")
        print(f"policy-cards: wrote {(ARTIFACTS / m / 'eval').relative_to(REPO)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
