"""Charts of the pages: chart data from the stored rollups (``gpu_hours``), the plotly figures
and their embedding (``figures``), and plotly.js itself as a static file (``plotly_static``)."""
