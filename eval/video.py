"""Offscreen frames of an episode and the gif they make (MUJOCO_GL is set in eval/__init__.py)."""
from __future__ import annotations

import os
from pathlib import Path

import mujoco


def open_renderer(sim, size: tuple[int, int]):
    """A (width, height) offscreen renderer, or None with a notice saying how to get one."""
    try:
        return mujoco.Renderer(sim.m, size[1], size[0])
    except Exception as e:  # noqa: BLE001 - no GL backend here
        print(f"notice: no offscreen renderer (MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {e}); skipping the video. "
              "On Debian/Ubuntu: apt-get install -y libosmesa6 and MUJOCO_GL=osmesa")
        return None


def render_frame(renderer, sim):
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.lookat[:] = [sim.d.qpos[0], sim.d.qpos[1], 0.6]
    cam.distance, cam.azimuth, cam.elevation = 2.6, 120.0, -12.0
    renderer.update_scene(sim.d, camera=cam)
    return renderer.render().copy()


def write_gif(frames, path: Path, fps: float) -> Path | None:
    try:
        from PIL import Image

        imgs = [Image.fromarray(f) for f in frames]
        imgs[0].save(path, save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0)
        return path
    except Exception as e:  # noqa: BLE001
        print(f"notice: could not write the video ({e})")
        return None
