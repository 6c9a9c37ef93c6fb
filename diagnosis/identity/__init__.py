"""Identities from the company's IdP (docs/operations.md, "Single sign-on"): OpenID Connect
through mozilla-django-oidc (:mod:`~diagnosis.identity.oidc`), or the header of a trusted auth
proxy (:mod:`~diagnosis.identity.proxy`); both map the IdP's groups to gpuobs roles with one map
(:mod:`~diagnosis.identity.role_map`) and write them through
:func:`diagnosis.actions.people.roles.set_roles`."""
