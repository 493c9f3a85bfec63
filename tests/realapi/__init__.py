"""Suite: the publishing paths against a real kube-apiserver (envtest convention, started
once per session by conftest.py). Skipped with one line when ``KUBEBUILDER_ASSETS`` is unset;
CI (.ci/run) sets it, and a control plane that cannot start fails every test here."""
