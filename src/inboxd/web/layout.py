"""The navigation of the dashboard's layout. A new area of the dashboard adds its entry here;
`admin` entries show only to admins, `pro` entries only to Pro users."""

from __future__ import annotations

from dataclasses import dataclass

from inboxd.model import User


@dataclass(frozen=True, slots=True)
class NavItem:
    label: str
    path: str
    admin: bool = False
    pro: bool = False


NAV: list[NavItem] = [
    NavItem("Mailboxes", "/mailboxes"),
    NavItem("Sandbox", "/sandbox", pro=True),
    NavItem("Domains", "/domains", pro=True),
    NavItem("Webhooks", "/webhooks", pro=True),
    NavItem("Account", "/account"),
    NavItem("Users", "/admin/users", admin=True),
]


def nav_for(user: User | None) -> list[NavItem]:
    if user is None:
        return []
    return [item for item in NAV if (not item.admin or user.role == "admin") and (not item.pro or user.is_pro)]
