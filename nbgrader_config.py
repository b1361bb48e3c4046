"""nbgrader configuration for the course (see README, "For instructors")."""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "gpus-for-ml"
# solutions/ is the single source; notebooks/ is what `make notebooks` generates.
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# A slow 2-core CPU must never fail a correct answer: give each cell time.
c.Execute.timeout = 900
# The course's data is generated, never stored in the assignment.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]
