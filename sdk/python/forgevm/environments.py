"""Environments: describe a base image plus packages, build it into an image (and push it), spawn from it."""

from __future__ import annotations

import time
import urllib.parse
from typing import Any, Dict, List, Optional

from ._http import Transport

_ENDED = ("ready", "failed", "canceled")


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _query(**params: Any) -> str:
    kept = {k: v for k, v in params.items() if v is not None}
    return "?" + urllib.parse.urlencode(kept) if kept else ""


class Environments:
    """``client.environments``: specs, builds of them, registry connections."""

    def __init__(self, http: Transport):
        self._http = http

    def create_spec(
        self,
        owner_id: str,
        name: str,
        base_image: str,
        python_packages: Optional[List[str]] = None,
        apt_packages: Optional[List[str]] = None,
        python_version: Optional[str] = None,
    ) -> Dict[str, Any]:
        body = {"owner_id": owner_id, "name": name, "base_image": base_image, "python_packages": python_packages or [], "apt_packages": apt_packages or []}
        if python_version:
            body["python_version"] = python_version
        return self._http.json("POST", "/environments/specs", body=body)

    def list_specs(self, owner_id: str) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/environments/specs" + _query(owner_id=owner_id))

    def get_spec(self, spec_id: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/environments/specs/{_q(spec_id)}")

    def suggestions(self, spec_id: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/environments/specs/{_q(spec_id)}/suggestions")

    def build(self, spec_id: str, targets: Optional[List[str]] = None, visibility: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"spec_id": spec_id}
        if targets:
            body["targets"] = targets
        if visibility:
            body["visibility"] = visibility
        return self._http.json("POST", "/environments/builds", body=body)

    def list_builds(self, owner_id: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/environments/builds" + _query(owner_id=owner_id, limit=limit))

    def get_build(self, build_id: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/environments/builds/{_q(build_id)}")

    def wait_build(self, build_id: str, timeout: float = 1800, interval: float = 1.0) -> Dict[str, Any]:
        """Polls a build until it is ready, failed or canceled (or `timeout` seconds pass)."""
        end = time.monotonic() + timeout
        while True:
            b = self.get_build(build_id)
            if b["status"] in _ENDED or time.monotonic() > end:
                return b
            time.sleep(interval)

    def cancel_build(self, build_id: str) -> Dict[str, Any]:
        return self._http.json("POST", f"/environments/builds/{_q(build_id)}/cancel")

    def spawn_config(self, build_id: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/environments/builds/{_q(build_id)}/spawn-config")

    def put_registry_connection(
        self,
        owner_id: str,
        provider: str,
        username: str,
        secret_ref: str,
        is_default: bool = False,
        registry: Optional[str] = None,
        id: Optional[str] = None,
    ) -> Dict[str, Any]:
        body: Dict[str, Any] = {"owner_id": owner_id, "provider": provider, "username": username, "secret_ref": secret_ref, "is_default": is_default}
        if registry:
            body["registry"] = registry
        if id:
            body["id"] = id
        return self._http.json("POST", "/environments/registry-connections", body=body)

    def list_registry_connections(self, owner_id: str) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/environments/registry-connections" + _query(owner_id=owner_id))

    def delete_registry_connection(self, connection_id: str) -> None:
        self._http.call("DELETE", f"/environments/registry-connections/{_q(connection_id)}")
