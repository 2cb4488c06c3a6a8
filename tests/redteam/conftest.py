# The files in submissions/ are hostile on purpose (os._exit, fork bombs...): pytest must
# never collect them (nbval would execute the notebooks in the test process).
collect_ignore_glob = ["submissions/*"]
