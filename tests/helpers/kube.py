"""What the tests of the Kubernetes client share: an ApiError raised as one line."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.errors import ApiError


def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    error = caught.value
    assert "\n" not in str(error), "one line"
    return error
