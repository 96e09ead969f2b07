"""A visitor's prompt that holds Markdown, opened by the operator in the everyone view: shown as typed, never run.

An image in it (`![t](http://host/x.png)`) would be fetched by the operator's browser, with a Referer; a link
(`[sign in again](http://…)`) would be one to click. The host is a loopback server of the test's that records every
fetch: nothing may reach it, and the page may hold no image or link to it, in any view of the prompt (the request
table, the selected request's details, the gallery's caption, the History tab's run).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import expect

from studio.backend.servers.supervisor import free_port
from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form
from tests.browser.test_visitors_page import ACCOUNTS, RUN_TIMEOUT_S, signed_in_page

FETCHED: list[str] = []  # what reached the attacker's host


class Recorder(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server's name
        FETCHED.append(f"{self.path} referer={self.headers.get('Referer')}")
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def attacker_host() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("visitor-text-page")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "olga")
    yield running
    stop_studio(running)


def links_and_images_to(page, host: str) -> list[str]:
    return page.evaluate(
        """(host) => [...document.querySelectorAll('img[src], a[href], [srcset]')]
            .map((e) => e.getAttribute('src') || e.getAttribute('href') || e.getAttribute('srcset'))
            .filter((address) => address.includes(host) || address.includes('example.invalid'))""",
        host,
    )


def test_markdown_in_a_visitors_prompt_is_shown_as_typed_to_the_operator(browser, studio, attacker_host):
    image = f"![t](http://{attacker_host}/x.png)"
    link = f"[sign in again](http://{attacker_host}/login)"
    prompt = f"{image} {link} www.example.invalid <http://{attacker_host}/auto>"
    bob = signed_in_page(browser, studio, "bob")
    fill_form(bob, prompt, frames=5, steps=2, copies=1, concurrency=1)
    bob.locator("#generate").click()
    bob.locator("#stats").get_by_text("1 completed").wait_for(timeout=RUN_TIMEOUT_S * 1000)

    olga = signed_in_page(browser, studio, "olga")
    olga.locator("#show").get_by_label("everyone").check()
    expect(olga.locator("#requests")).to_contain_text(image, timeout=30_000)
    olga.locator("#requests").get_by_text(image).last.click()
    expect(olga.locator("#details")).to_contain_text(f"{image} {link}", timeout=30_000)
    olga.get_by_role("tab", name="History").click()
    expect(olga.locator("#history")).to_contain_text(image, timeout=30_000)
    olga.locator("#history").get_by_text(image).last.click()
    expect(olga.locator("#history-requests")).to_contain_text(image, timeout=30_000)
    expect(olga.locator("#history-gallery")).to_contain_text(image[:40], timeout=30_000)
    bob.locator("#gallery .thumbnail-item").first.click()
    expect(bob.locator("#details")).to_contain_text(f"{image} {link}", timeout=30_000)

    for page in (olga, bob):
        assert links_and_images_to(page, attacker_host) == []
    assert FETCHED == []
    for page in (olga, bob):
        page.context.close()
