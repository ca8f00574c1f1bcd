"""A study's research team: the owner invites a co-researcher by link, as an editor (sees and changes the study) or
a viewer (sees it, its reports and its annotation queues; changes nothing), and the invited person sets their
password from the link.

Built on Django's own tools rather than django-invitations / django-allauth: the site has no e-mail, sign-up or
social login to configure (the owner hands the link over as they like), and what is needed is one model
(:class:`studies.models.StudyInvitation`), a random key of which only the SHA-256 is stored, and Django's
``UserCreationForm`` with the site's password validators. docs/operations.md, "A research team".
"""

from __future__ import annotations

import hashlib
import secrets

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from studies import forms as study_forms
from studies.invitations import StudyInvitation
from studies.models import Study
from studies.roles import AuthenticatedHttpRequest, researcher_required


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_invitation(study: Study, *, role: str, note: str = "", by: User | None = None) -> tuple[StudyInvitation, str]:
    """A fresh invitation and its key (the only time the key exists: the link is built from it)."""
    key = secrets.token_urlsafe(32)
    invitation = StudyInvitation.objects.create(
        study=study,
        role=role,
        note=note[:200],
        key_sha256=_digest(key),
        created_by=by,
    )
    return invitation, key


def find_invitation(key: str) -> StudyInvitation | None:
    if not key or len(key) > 100:
        return None
    return StudyInvitation.objects.select_related("study").filter(key_sha256=_digest(key)).first()


def accept(invitation: StudyInvitation, user: object) -> None:
    """The user joins the study with the invitation's role (replacing a role they had; the owner stays owner)."""
    study = invitation.study
    with transaction.atomic():
        locked = StudyInvitation.objects.select_for_update().get(pk=invitation.pk)
        if not locked.usable:
            raise PermissionDenied("This invitation was used, withdrawn, or has expired.")
        if not study.is_owner(user):
            if locked.role == StudyInvitation.Role.VIEWER:
                study.shared_with.remove(user)  # type: ignore[arg-type]
                study.viewers.add(user)  # type: ignore[arg-type]
            else:
                study.viewers.remove(user)  # type: ignore[arg-type]
                study.shared_with.add(user)  # type: ignore[arg-type]
        locked.accepted_at, locked.accepted_by = timezone.now(), user  # type: ignore[assignment]
        locked.save(update_fields=["accepted_at", "accepted_by"])


def join_url(request: HttpRequest, key: str) -> str:
    return request.build_absolute_uri(reverse("studies:team_join", args=[key]))


@require_POST
@researcher_required
def invite(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The owner makes an invitation link; it is shown once, on the study page."""
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    if not study.can_share(request.user):
        raise PermissionDenied("Only the study's owner invites co-researchers.")
    form = study_forms.TeamInviteForm(request.POST)
    if not form.is_valid():
        messages.error(
            request, "Invitation not made: " + "; ".join(str(e) for errs in form.errors.values() for e in errs)
        )
        return redirect(reverse("studies:detail", args=[study.slug]) + "#team")
    invitation, key = new_invitation(
        study, role=form.cleaned_data["role"], note=form.cleaned_data["note"], by=request.user
    )
    request.session["team_link"] = {"study": study.pk, "url": join_url(request, key), "role": invitation.role}
    return redirect(reverse("studies:detail", args=[study.slug]) + "#team")


@require_POST
@researcher_required
def revoke(request: AuthenticatedHttpRequest, slug: str, pk: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.visible_to(request.user), slug=slug)
    if not study.can_share(request.user):
        raise PermissionDenied("Only the study's owner withdraws invitations.")
    StudyInvitation.objects.filter(study=study, pk=pk, accepted_at__isnull=True).update(revoked_at=timezone.now())
    messages.success(request, "The invitation was withdrawn: its link no longer works.")
    return redirect(reverse("studies:detail", args=[study.slug]) + "#team")


class JoinForm(UserCreationForm):  # type: ignore[type-arg]
    """Username and password, twice (Django's form: the site's password validators apply)."""


@require_http_methods(["GET", "POST"])
def join(request: HttpRequest, key: str) -> HttpResponse:
    """The invited person's page: a new account (username, password) or, signed in, one button."""
    invitation = find_invitation(key)
    if invitation is None or not invitation.usable:
        return render(
            request, "studies/team/invalid.html", {"invitation": invitation}, status=410 if invitation else 404
        )
    study = invitation.study
    user = request.user if request.user.is_authenticated else None
    form = None
    if request.method == "POST":
        if user is None:
            form = JoinForm(request.POST)
            if form.is_valid():
                with transaction.atomic():
                    user = form.save(commit=False)
                    user.is_staff = True  # a researcher (studies.roles): sees only the studies they are given
                    user.save()
                    accept(invitation, user)
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        else:
            if not user.is_staff:
                type(user).objects.filter(pk=user.pk).update(is_staff=True)
            accept(invitation, user)
            form = None
        if user is not None and (form is None or form.is_valid()):
            messages.success(
                request,
                f"Welcome to the team of “{study.name}” as {invitation.get_role_display().split(':')[0].lower()}.",
            )
            return redirect(reverse("studies:detail", args=[study.slug]))
    elif user is None:
        form = JoinForm()
    context = {"invitation": invitation, "study": study, "form": form, "user_joining": user}
    return render(request, "studies/team/join.html", context, status=400 if form is not None and form.errors else 200)
