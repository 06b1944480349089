"""A factory module that cannot even be imported (a typo'd dependency, a syntax slip)."""

from __future__ import annotations

raise ImportError("this module needs the 'timm' package")
