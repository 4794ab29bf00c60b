"""A sandbox's desktop (``sandbox.desktop``), for computer-use agents: screenshots, the mouse, the
keyboard, windows and the live view, over the REST API's /sandboxes/{id}/desktop routes. The
sandbox must be made from the desktop image (forgevm/desktop:bookworm); any other answers 409."""

from __future__ import annotations

import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ._http import Transport
from .wire import DesktopInfo, DesktopStream, DesktopWindow

#: Typing and combinations may take a while at a slow desktop; the default timeout is for one step.
_INPUT_TIMEOUT = 120.0


class Desktop:
    def __init__(self, http: Transport, sandbox_id: str):
        self._http = http
        self._id = sandbox_id

    def _path(self, suffix: str = "") -> str:
        return f"/sandboxes/{urllib.parse.quote(self._id, safe='')}/desktop{suffix}"

    def _act(self, suffix: str, body: Dict[str, Any], timeout: float = _INPUT_TIMEOUT) -> None:
        self._http.call("POST", self._path(suffix), body=body, sandbox_id=self._id, timeout=max(self._http.timeout or 0, timeout))

    def info(self) -> DesktopInfo:
        """Whether the desktop runs, its screen's size, and its processes."""
        return self._http.json("GET", self._path(), sandbox_id=self._id)

    def start(self) -> DesktopInfo:
        """Starts the display and its session where they do not run."""
        return self._http.json("POST", self._path("/start"), sandbox_id=self._id, timeout=max(self._http.timeout or 0, 360.0))

    def stop(self) -> DesktopInfo:
        """Stops the display, its session and the live view."""
        return self._http.json("POST", self._path("/stop"), sandbox_id=self._id, timeout=max(self._http.timeout or 0, 150.0))

    def set_screen(self, width: int, height: int, dpi: Optional[int] = None) -> DesktopInfo:
        """Sets the screen's size (and, when given, its DPI) without a restart; kept for the next boot."""
        body = {"width": width, "height": height, "dpi": dpi}
        return self._http.json("PUT", self._path("/screen"), body=body, sandbox_id=self._id, timeout=max(self._http.timeout or 0, 90.0))

    def screen_size(self) -> Tuple[int, int]:
        """The screen's (width, height) in pixels."""
        screen = self.info()["screen"]
        if not screen:
            raise RuntimeError(f"sandbox {self._id}'s desktop is not running: start it (sandbox.desktop.start())")
        return screen["width"], screen["height"]

    def screenshot(
        self,
        format: Optional[str] = None,
        quality: Optional[int] = None,
        scale: Optional[float] = None,
        cursor: Optional[bool] = None,
        region: Optional[Tuple[int, int, int, int]] = None,
    ) -> bytes:
        """A screenshot's bytes: a PNG of the whole screen by default; ``region`` is (x, y, width, height)."""
        query: Dict[str, Any] = {"format": format, "quality": quality, "scale": scale, "cursor": None if cursor is None else str(cursor).lower()}
        if region is not None:
            query.update(zip(("x", "y", "width", "height"), region))
        with self._http.open("GET", self._path("/screenshot"), query=query, sandbox_id=self._id, timeout=max(self._http.timeout or 0, 60.0)) as res:
            return res.read()

    def cursor(self) -> Tuple[int, int]:
        """Where the pointer is."""
        p = self._http.json("GET", self._path("/cursor"), sandbox_id=self._id)
        return p["x"], p["y"]

    def move_mouse(self, x: int, y: int) -> None:
        self._act("/mouse/move", {"x": x, "y": y})

    def click(self, x: Optional[int] = None, y: Optional[int] = None, button: str = "left", count: int = 1, modifiers: Optional[Sequence[str]] = None) -> None:
        """A click at (x, y), or where the pointer is; ``count`` 2 is a double click; ``modifiers`` are held."""
        self._act("/mouse/click", {"x": x, "y": y, "button": button, "count": count, "modifiers": list(modifiers) if modifiers else None})

    def double_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        self.click(x, y, count=2)

    def right_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        self.click(x, y, button="right")

    def drag(self, start: Tuple[int, int], end: Tuple[int, int], button: str = "left") -> None:
        """Presses the button at ``start``, moves to ``end`` and releases it there."""
        self._act("/mouse/drag", {"start_x": start[0], "start_y": start[1], "end_x": end[0], "end_y": end[1], "button": button})

    def scroll(self, direction: str, amount: int = 1, x: Optional[int] = None, y: Optional[int] = None) -> None:
        """Turns the wheel ``amount`` clicks ("up", "down", "left", "right"), at (x, y) when given."""
        self._act("/mouse/scroll", {"direction": direction, "amount": amount, "x": x, "y": y})

    def type(self, text: str, delay_ms: Optional[int] = None) -> None:
        """Types text as key presses (any characters), ``delay_ms`` between keys."""
        self._act("/keyboard/type", {"text": text, "delay_ms": delay_ms}, _INPUT_TIMEOUT + len(text) * ((delay_ms or 12) + 20) / 1000)

    def press(self, keys: Union[str, List[str]]) -> None:
        """Presses a key or a combination: "Return", "ctrl+c", or ["ctrl", "shift", "t"]."""
        self._act("/keyboard/press", {"keys": keys})

    def windows(self) -> List[DesktopWindow]:
        """The visible windows with a name, the one with the focus marked."""
        return self._http.json("GET", self._path("/windows"), sandbox_id=self._id)

    def stream(self, view_only: bool = False, ttl: Optional[str] = None) -> DesktopStream:
        """Starts the live view and returns its URL: take over by default, or watch only."""
        return self._http.json("POST", self._path("/stream"), body={"view_only": view_only, "ttl": ttl}, sandbox_id=self._id, timeout=max(self._http.timeout or 0, 90.0))

    def stop_stream(self) -> None:
        """Stops the live view (the desktop keeps running)."""
        self._http.call("DELETE", self._path("/stream"), sandbox_id=self._id)
