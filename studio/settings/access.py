"""Who is who: accounts of the page, which of them are operators, and whether strangers may generate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import NoDecode

from studio.settings_flags import flags


class AccessSettings(BaseModel):
    """Who is who: accounts of the page, which of them are operators, and whether strangers may generate."""

    group_title: ClassVar[str] = "visitors and operators"

    auth: Annotated[list[SecretStr], NoDecode] = Field(
        title="Accounts",
        default_factory=list,
        description="an account of the page, user:pass (repeatable); each account is its own visitor",
        json_schema_extra={"repeat": True},
    )
    auth_file: Path | None = Field(
        title="Accounts file",
        default=None,
        description="a file of accounts, one user:pass per line (# starts a comment)",
    )
    api_key_file: Path | None = Field(
        title="API keys file",
        default=None,
        description="keys for programs calling the studio's /v1/videos API, one USER:KEY or USER:sha256:HEX per line "
        "(# starts a comment; `omni-studio keys add USER` makes one); a key's user is the account of that name",
    )
    mcp: bool = Field(
        title="MCP server",
        default=False,
        description="serve the studio as an MCP server too (Gradio's, at /gradio_api/mcp/): tools to make a video, "
        "follow it and list one's own, each called with the caller's API key (Authorization: Bearer KEY)",
    )
    operators: Annotated[list[str], NoDecode] = Field(
        title="Operators",
        default_factory=list,
        description="a user who runs the servers and sees everyone's work (repeatable; default: the first --auth "
        "user; on a Space, Hugging Face user names)",
        json_schema_extra={**flags("--operator"), "repeat": True},
    )
    allow_anonymous: bool = Field(
        title="Allow visitors without sign-in",
        default=False,
        description="let visitors who have not signed in generate, each browser its own visitor (never an operator)",
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        title="Trusted proxies",
        default_factory=list,
        description="addresses or networks of the reverse proxies whose X-Forwarded-For the studio believes "
        "(comma-separated, e.g. 127.0.0.1 behind a proxy on this machine; a Space's own networks are set on a Space); "
        "default: none, the peer's own address counts",
        json_schema_extra=flags("--forwarded-allow-ips"),
    )
    allow_private_image_urls: bool = Field(
        title="Allow private image URLs",
        default=False,
        description="let visitors' image URLs name loopback, private, link-local or reserved addresses (servers on "
        "the studio's own network fetch them); default: refused (operators' URLs are not checked)",
    )
    insecure: bool = Field(
        title="Insecure (everyone an operator)",
        default=False,
        description="serve a non-loopback host or --share with no sign-in, every visitor an operator",
    )
