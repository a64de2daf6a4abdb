"""Rendering an operator's templated fields: ``job_manifest`` as a template file or inline text, and the
environment's values masked by every name they go by. A mixin of ``BaseTrainingJobOperator``, apart so that
the operator module holds the job's life and this one how its fields are rendered."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.manifest.loading import is_manifest_path, manifest_template
from airflow_provider_disttrain.manifest.pod_validation import env_values_by_name
from airflow_provider_disttrain.manifest.templating import check_rendered_manifest, has_jinja

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context


class ManifestTemplatesMixin:
    """Renders ``job_manifest`` and masks ``env`` (the operator's fields of those names)."""

    job_manifest: Any
    env: Any

    def _do_render_template_fields(
        self,
        parent: Any,
        template_fields: Iterable[str],
        context: Context,
        jinja_env: jinja2.Environment,
        seen_oids: set[int],
    ) -> None:
        """Render ``job_manifest`` given as a file path (relative to the DAG folder, or absolute; the path
        itself may be a template) as a template file, and every other field as a plain template (Airflow's
        ``template_ext`` would read any field ending in the suffix as a file). Mapped tasks render through
        here too."""
        if parent is self and "job_manifest" in template_fields and isinstance(self.job_manifest, str):
            self.job_manifest = self._render_manifest_text(self.job_manifest, context, jinja_env)
            template_fields = [field for field in template_fields if field != "job_manifest"]
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)  # type: ignore[misc]
        if parent is self and self.env:
            from airflow.sdk.log import mask_secret

            # Airflow masks a rendered mapping's values by their keys only: give it the names of every form.
            values: dict[str, Any] = env_values_by_name(self.env)
            mask_secret(values)

    def _render_manifest_text(self, value: str, context: Context, jinja_env: jinja2.Environment) -> Any:
        """``job_manifest`` given as text, rendered. A one-line template is rendered first and read as the
        path of a template file if it names one (``{{ params.manifest }}``); the file, or the inline YAML,
        is rendered once (Jinja in a rendered value stays text), and must not gain privileges from what it
        rendered (``templating.refuse_rendered_privileges``)."""
        path: Any = value
        if "\n" not in value.strip() and has_jinja(value, jinja_env):
            path = self.render_template(value, context, jinja_env)  # type: ignore[attr-defined]
            if not is_manifest_path(path):  # one line of YAML or JSON text, rendered
                return check_rendered_manifest(value, path, jinja_env)
        if not is_manifest_path(path):  # inline YAML
            return check_rendered_manifest(value, self.render_template(value, context, jinja_env), jinja_env)  # type: ignore[attr-defined]
        template, text = manifest_template(jinja_env, str(path))
        return check_rendered_manifest(text, self._render(template, context), jinja_env)  # type: ignore[attr-defined]
