"""TokenReview (authentication.k8s.io/v1) against the apiserver."""

from __future__ import annotations

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.auth import Identity
from gpuplane_core.errors import Unauthorized
from gpuplane_core.k8s.errors import translate_api_exception


class KubeTokenReviewer:
    """Asks the apiserver who a token belongs to; optionally demands audiences."""

    def __init__(self, api: client.ApiClient, audiences: list[str] | None = None) -> None:
        self._auth = client.AuthenticationV1Api(api)
        self._audiences = audiences

    async def review(self, token: str) -> Identity:
        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=self._audiences))
        try:
            resp = await self._auth.create_token_review(body=body)
        except ApiException as e:
            raise translate_api_exception(e) from e
        status = resp.status
        if status is None or not status.authenticated or status.user is None:
            # The apiserver's reason (status.error) may echo token details: keep it out.
            raise Unauthorized("invalid or expired token")
        user = status.user
        extra = {k: tuple(v or ()) for k, v in (user.extra or {}).items()}
        return Identity(
            username=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra=extra,
        )
