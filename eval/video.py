"""Offscreen video of an episode (MUJOCO_GL is set in eval/__init__.py): a camera that tracks the
pelvis from the side at 3 m, a checker floor and a sky, the reference drawn as a translucent ghost,
and a still strip of key frames (crouch, take-off, apex, touch-down, stand) beside the gif.

The look lives in a render-only copy of the bridge model (`render_model`: textures, materials,
off-screen buffer size); physics runs on the eval's own model, whose state is copied in per frame.
"""
from __future__ import annotations

import os
from pathlib import Path

import mujoco
import numpy as np

GHOST_RGBA = (0.3, 0.7, 1.0, 0.3)
CAMERA = dict(distance=3.0, azimuth=90.0, elevation=-8.0, lookat_z=0.6)  # side view (camera on -y)


def render_model(size: tuple[int, int]) -> mujoco.MjModel:
    """The bridge model with a checker floor, a gradient sky, and an off-screen buffer of `size`."""
    from robots import model as RM

    spec = RM.build_bridge_spec()
    spec.add_texture(name="sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX, builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
                     rgb1=[0.55, 0.75, 0.95], rgb2=[0.05, 0.1, 0.2], width=512, height=3072)
    spec.add_texture(name="checker", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
                     rgb1=[0.82, 0.82, 0.8], rgb2=[0.45, 0.47, 0.5], width=512, height=512)
    mat = spec.add_material(name="checker_floor", texrepeat=[8, 8], reflectance=0.0)  # a reflection pass doubles osmesa time
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "checker"
    for g in spec.geoms:
        if g.name == "floor":
            g.material = "checker_floor"
            g.rgba = [1, 1, 1, 1]
            if g.size[0] == 0:  # an infinite plane: give the checker a scale
                g.size = [0, 0, 0.05]
    spec.visual.global_.offwidth = max(int(size[0]), spec.visual.global_.offwidth)
    spec.visual.global_.offheight = max(int(size[1]), spec.visual.global_.offheight)
    spec.visual.headlight.ambient = [0.45, 0.45, 0.45]
    spec.visual.headlight.diffuse = [0.6, 0.6, 0.6]
    return spec.compile()


class EpisodeVideo:
    """Frames of one episode with the reference ghost; `capture` after each control step's physics."""

    def __init__(self, sim, size: tuple[int, int], ref_q=None, ref_base_pos=None, ref_base_quat=None):
        self.m = render_model(size)
        self.d = mujoco.MjData(self.m)
        self.ghost = mujoco.MjData(self.m)
        self.renderer = mujoco.Renderer(self.m, size[1], size[0])
        self.qadr = sim.qadr
        self.ref_q, self.ref_pos, self.ref_quat = ref_q, ref_base_pos, ref_base_quat
        self.opt = mujoco.MjvOption()
        self.pert = mujoco.MjvPerturb()
        self.cam = mujoco.MjvCamera()
        self.cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.cam.distance, self.cam.azimuth, self.cam.elevation = (CAMERA["distance"], CAMERA["azimuth"],
                                                                   CAMERA["elevation"])
        self.frames: list[np.ndarray] = []
        self.times: list[float] = []

    def _pose_ghost(self, k: int, ghost_qpos=None) -> bool:
        if ghost_qpos is not None:  # the caller placed the reference (a tracking policy's, turned to the robot)
            self.ghost.qpos[:] = ghost_qpos
            mujoco.mj_kinematics(self.m, self.ghost)
            return True
        if self.ref_q is None:
            return False
        k = min(k, len(self.ref_q) - 1)
        g = self.ghost
        g.qpos[:] = 0
        g.qpos[:3] = self.ref_pos[k]
        g.qpos[3:7] = self.ref_quat[k] if self.ref_quat is not None else [1, 0, 0, 0]
        g.qpos[self.qadr] = self.ref_q[k]
        mujoco.mj_kinematics(self.m, g)
        return True

    def render(self, qpos: np.ndarray, k: int, ghost_qpos=None) -> np.ndarray:
        self.d.qpos[:] = qpos
        mujoco.mj_kinematics(self.m, self.d)
        self.cam.lookat[:] = [qpos[0], qpos[1], CAMERA["lookat_z"]]
        self.renderer.update_scene(self.d, camera=self.cam)
        scn = self.renderer.scene
        if self._pose_ghost(k, ghost_qpos):
            n0 = scn.ngeom
            mujoco.mjv_addGeoms(self.m, self.ghost, self.opt, self.pert, mujoco.mjtCatBit.mjCAT_DYNAMIC, scn)
            for i in range(n0, scn.ngeom):
                scn.geoms[i].rgba[:] = GHOST_RGBA
        return self.renderer.render().copy()

    def capture(self, sim, t: float, k: int, ghost_qpos=None) -> None:
        self.frames.append(self.render(sim.d.qpos.copy(), k, ghost_qpos))
        self.times.append(t)

    def close(self) -> None:
        self.renderer.close()


def open_video(sim, size: tuple[int, int], ref_q=None, ref_base_pos=None, ref_base_quat=None):
    """An EpisodeVideo, or None with a notice saying how to get a renderer."""
    try:
        return EpisodeVideo(sim, size, ref_q, ref_base_pos, ref_base_quat)
    except Exception as e:  # noqa: BLE001 - no GL backend here
        print(f"notice: no offscreen renderer (MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {e}); skipping the video. "
              "On Debian/Ubuntu: apt-get install -y libosmesa6 and MUJOCO_GL=osmesa")
        return None


def open_renderer(sim, size: tuple[int, int]):
    """A plain (width, height) offscreen renderer of the eval model, or None with a notice."""
    try:
        return mujoco.Renderer(sim.m, size[1], size[0])
    except Exception as e:  # noqa: BLE001 - no GL backend here
        print(f"notice: no offscreen renderer (MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {e}); skipping the video. "
              "On Debian/Ubuntu: apt-get install -y libosmesa6 and MUJOCO_GL=osmesa")
        return None


def render_frame(renderer, sim, k: int = 0):
    """One frame of the eval model's state; an EpisodeVideo draws the reference ghost of step k."""
    if isinstance(renderer, EpisodeVideo):
        return renderer.render(sim.d.qpos.copy(), k)
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
        imgs[0].save(path, save_all=True, append_images=imgs[1:], duration=int(round(1000 / fps)), loop=0)
        return path
    except Exception as e:  # noqa: BLE001
        print(f"notice: could not write the video ({e})")
        return None


def key_times(ref_height: np.ndarray, dt: float, flights, duration: float) -> list[tuple[str, float]]:
    """(label, time) of crouch (lowest pelvis before the first take-off), take-off, apex (highest
    pelvis in that flight), touch-down and stand (the end); without a flight: start, lowest, end."""
    t = np.arange(len(ref_height)) * dt
    if not flights:
        return [("start", 0.0), ("lowest", float(t[int(np.argmin(ref_height))])), ("end", float(duration))]
    t0, t1 = flights[0]
    pre = t <= t0 + 1e-9
    fl = (t >= t0 - 1e-9) & (t <= t1 + 1e-9)
    return [("crouch", float(t[pre][int(np.argmin(ref_height[pre]))])), ("take-off", float(t0)),
            ("apex", float(t[fl][int(np.argmax(ref_height[fl]))])), ("touch-down", float(t1)), ("stand", float(duration))]


def write_strip(frames, times, keys, path: Path) -> Path | None:
    """The frames nearest each key time side by side, labelled, as one png."""
    try:
        from PIL import Image, ImageDraw

        times = np.asarray(times)
        picks = [(label, frames[int(np.argmin(np.abs(times - tk)))], float(times[int(np.argmin(np.abs(times - tk)))]))
                 for label, tk in keys]
        h, w = picks[0][1].shape[:2]
        strip = Image.new("RGB", (w * len(picks), h), "white")
        draw = ImageDraw.Draw(strip)
        for i, (label, f, tf) in enumerate(picks):
            strip.paste(Image.fromarray(f), (i * w, 0))
            draw.rectangle([i * w + 6, 6, i * w + 190, 30], fill=(0, 0, 0))
            draw.text((i * w + 12, 12), f"{label}  t = {tf:.2f} s", fill=(255, 255, 255))
        strip.save(path)
        return path
    except Exception as e:  # noqa: BLE001
        print(f"notice: could not write the key-frame strip ({e})")
        return None
