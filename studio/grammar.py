"""The prompt grammar of the small model: simple scenes with exact ground truth.

A scene is one or two identical shapes of one color, all moving the same way, on a plain background:

    "a red circle moving left on a white background"
    "two blue squares moving up on black"
    "an orange triangle growing on a gray background"

`parse_prompt` reads any prompt of the grammar (canonical or one of its variant phrasings) back into a `Scene`;
`train_scenes` / `heldout_scenes` split the finite set of attribute combinations into a training part and a
held-out part that training never sees (for the quality benchmark).
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

# Object colors (RGB 0-255). Saturated and far apart, none of them a background color.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "orange": (250, 140, 0),
    "yellow": (245, 220, 20),
    "green": (30, 170, 50),
    "cyan": (0, 200, 220),
    "blue": (30, 70, 230),
    "purple": (140, 40, 200),
    "pink": (250, 110, 190),
}
# Background colors: neutral, so every object color stands out on every background.
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "white": (245, 245, 245),
    "black": (12, 12, 12),
    "gray": (120, 120, 120),
    "beige": (228, 214, 180),
}
DEFAULT_BACKGROUND = "white"  # a prompt that names none
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond")
# Motions: four translations, none, and two of size.
MOTIONS: tuple[str, ...] = ("left", "right", "up", "down", "still", "growing", "shrinking")
TRANSLATIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
COUNTS: tuple[int, ...] = (1, 2)

_MOTION_PHRASES: dict[str, tuple[str, ...]] = {
    "left": ("moving left", "moving to the left", "going left", "sliding left"),
    "right": ("moving right", "moving to the right", "going right", "sliding right"),
    "up": ("moving up", "moving upward", "going up", "rising"),
    "down": ("moving down", "moving downward", "going down", "falling"),
    "still": ("standing still", "staying still", "not moving", "resting"),
    "growing": ("growing", "getting bigger", "expanding"),
    "shrinking": ("shrinking", "getting smaller", "contracting"),
}
_MOTION_WORDS = {
    "left": "left",
    "right": "right",
    "up": "up",
    "upward": "up",
    "rising": "up",
    "down": "down",
    "downward": "down",
    "falling": "down",
    "still": "still",
    "resting": "still",
    "growing": "growing",
    "bigger": "growing",
    "expanding": "growing",
    "shrinking": "shrinking",
    "smaller": "shrinking",
    "contracting": "shrinking",
}
_COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "single": 1, "two": 2, "2": 2, "1": 1}


@dataclass(frozen=True, order=True)
class Scene:
    """What a prompt says: the exact ground truth of its clip."""

    count: int
    color: str
    shape: str
    motion: str
    background: str

    def __post_init__(self) -> None:
        if self.count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, got {self.count}")
        if self.color not in COLORS:
            raise ValueError(f"unknown color {self.color!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}")
        if self.motion not in MOTIONS:
            raise ValueError(f"unknown motion {self.motion!r}")
        if self.background not in BACKGROUNDS:
            raise ValueError(f"unknown background {self.background!r}")

    @property
    def prompt(self) -> str:
        """The canonical prompt."""
        return format_prompt(self)


def format_prompt(scene: Scene, variant: int = 0, background_style: int = 0) -> str:
    """A prompt for a scene. `variant` picks the motion phrasing, `background_style` the background phrasing:
    0 "on a white background", 1 "on white", 2 none at all (only for the default background)."""
    if scene.count == 1:
        article = "an" if scene.color[0] in "aeiou" else "a"
        subject = f"{article} {scene.color} {scene.shape}"
    else:
        subject = f"two {scene.color} {scene.shape}s"
    phrases = _MOTION_PHRASES[scene.motion]
    words = [subject, phrases[variant % len(phrases)]]
    if background_style == 2 and scene.background == DEFAULT_BACKGROUND:
        pass
    elif background_style == 1:
        words.append(f"on {scene.background}")
    else:
        words.append(f"on a {scene.background} background")
    return " ".join(words)


def random_prompt(scene: Scene, rng: random.Random) -> str:
    """One of the grammar's phrasings of a scene, mostly the canonical one (for training)."""
    variant = 0 if rng.random() < 0.5 else rng.randrange(len(_MOTION_PHRASES[scene.motion]))
    style = rng.choice((0, 0, 1, 2)) if scene.background == DEFAULT_BACKGROUND else rng.choice((0, 0, 1))
    return format_prompt(scene, variant, style)


def words_of(prompt: str) -> list[str]:
    """Lower-case words of a prompt, punctuation dropped (the tokenizer splits the same way)."""
    return re.findall(r"[a-z0-9]+", prompt.lower())


def parse_prompt(prompt: str) -> Scene | None:
    """The scene a prompt of the grammar describes, or None when it is not one."""
    words = words_of(prompt)
    if not words:
        return None
    count = _COUNT_WORDS.get(words[0], 1 if words[0] in COLORS else None)
    if count is None:
        return None
    # The object color is the color word before the shape; a background color comes after "on".
    on_index = words.index("on") if "on" in words else len(words)
    head, tail = words[:on_index], words[on_index:]
    colors = [w for w in head if w in COLORS]
    shapes = [w.removesuffix("s") for w in head if w.removesuffix("s") in SHAPES]
    motions = [_MOTION_WORDS[w] for w in head if w in _MOTION_WORDS]
    if "not" in head and "moving" in head:
        motions = ["still"]
    backgrounds = [w for w in tail if w in BACKGROUNDS]
    if len(colors) != 1 or len(shapes) != 1 or not motions:
        return None
    return Scene(count, colors[0], shapes[0], motions[0], backgrounds[0] if backgrounds else DEFAULT_BACKGROUND)


def all_scenes() -> list[Scene]:
    return [Scene(*combo) for combo in itertools.product(COUNTS, COLORS, SHAPES, MOTIONS, BACKGROUNDS)]


HELDOUT_SEED = 20240611
HELDOUT_FRACTION = 0.125


def _split() -> tuple[list[Scene], list[Scene]]:
    scenes = all_scenes()
    rng = random.Random(HELDOUT_SEED)
    order = list(range(len(scenes)))
    rng.shuffle(order)
    n_held = round(len(scenes) * HELDOUT_FRACTION)
    held = sorted(scenes[i] for i in order[:n_held])
    train = sorted(scenes[i] for i in order[n_held:])
    return train, held


_TRAIN, _HELDOUT = _split()


def train_scenes() -> list[Scene]:
    """Attribute combinations the model trains on (87.5% of all)."""
    return list(_TRAIN)


def heldout_scenes() -> list[Scene]:
    """Attribute combinations excluded from training (12.5% of all); each color, shape, motion, background and
    count still occurs in training, only the combination is new."""
    return list(_HELDOUT)


def vocabulary() -> list[str]:
    """Every word the grammar can produce, plus a few common prompt words."""
    words: set[str] = {"on", "a", "an", "two"}
    words.update(COLORS)
    words.update(BACKGROUNDS)
    words.update(SHAPES)
    words.update(f"{shape}s" for shape in SHAPES)
    for phrases in _MOTION_PHRASES.values():
        for phrase in phrases:
            words.update(words_of(phrase))
    words.update(_COUNT_WORDS)
    words.update(("the", "and", "of", "in", "with", "background", "video", "moving", "is"))
    return sorted(words)


def _listed(words: list[str] | tuple[str, ...]) -> str:
    return ", ".join(words)


def summary() -> str:
    """What the model understands, in a few lines for a user."""
    motions = ", ".join(phrases[0] for phrases in _MOTION_PHRASES.values())
    return (
        "The default model draws one or two shapes of one color, all moving the same way, on a plain background: "
        '"a red circle moving left on a white background", "two blue squares moving up on black". '
        f"Colors: {_listed(list(COLORS))}. Shapes: {_listed(SHAPES)}. Motions: {motions}. "
        f"Backgrounds: {_listed(list(BACKGROUNDS))} (default {DEFAULT_BACKGROUND})."
    )


def what_is_missing(prompt: str) -> str | None:
    """Why the model cannot draw `prompt` as asked (what of the grammar it lacks, or a word it does not know in a
    shape's place); None for a prompt of the grammar."""
    if parse_prompt(prompt) is not None:
        return None
    words = words_of(prompt)
    on_index = words.index("on") if "on" in words else len(words)
    head = words[:on_index]
    colors = [w for w in head if w in COLORS]
    shapes = [w.removesuffix("s") for w in head if w.removesuffix("s") in SHAPES]
    motions = [w for w in head if w in _MOTION_WORDS]
    wrong_colors = [w for w in head if w in BACKGROUNDS and w not in COLORS]
    problems = []
    if wrong_colors and not colors:
        problems.append(f"{wrong_colors[0]} is a background color, not a shape's ({_listed(list(COLORS))})")
    elif len(colors) != 1:
        problems.append(f"name one color ({_listed(list(COLORS))})" if not colors else "name one color, not several")
    if len(shapes) != 1:
        problems.append(f"name one shape ({_listed(SHAPES)})" if not shapes else "name one shape, not several")
    if not motions and not ("not" in head and "moving" in head):
        problems.append("say how it moves (moving left/right/up/down, standing still, growing, shrinking)")
    if not problems:
        problems.append("start with a, an, one or two, or with the color")
    return "; ".join(problems)
