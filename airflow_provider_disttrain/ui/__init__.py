"""The provider's Airflow UI: a "Training job" tab on each task instance and a "Training jobs" page.

``plugin`` registers them (cheap to import: no FastAPI), ``app`` is the FastAPI app that serves them
(imported by the API server only), ``view`` builds what they show from job objects (pure), and
``listing`` keeps the short-lived shared cache of job LISTs.
"""
