"""People: who may use gpuobs and with which role (docs/operations.md, "Users and roles").

Roles are Django groups (:mod:`diagnosis.roles`) and a manager's tenants are ``Tenant.managers``;
:func:`~diagnosis.actions.people.roles.set_roles` is the one writer of both, whoever asks: the
``users`` command, the admin's "Add a user" page, a single sign-on login (the IdP's groups,
mapped) and the auth proxy's header.
"""
