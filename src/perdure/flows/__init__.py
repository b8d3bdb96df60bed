"""DAG flows (DESIGN §6): shapes and their checks (`definition`), the pure planner
(`planner`), and the Python DSL (`dsl`: ``app.flow(...)``)."""
