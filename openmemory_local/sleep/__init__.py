"""Where episodes become lessons: sleep's four passes (passes: decay, learn, verify, predict), the
index of groups (cluster), what a surprise and a situation are (situations), the texts a lesson
and a prediction carry (lesson_text), a history replayed as it happened (replay), and lessons as
the rest of the program sees them (lessons).
"""
