"""The runners: where candidates are verified and programs timed, one module per kind.

* ``base`` -- the ``Runner`` interface and its one set of requests and outcomes
  (``VerifyJob``, ``VerifyOutcome``, ``TimingOutcome``);
* ``local`` -- ``Measurer``, this machine's runner: isolated workers, the cache, the device lock;
* ``tasks`` -- what the local runner's isolated workers run;
* ``rpc`` -- ``RPCBackend``: timings on a remote device through a TVM RPC tracker;
* ``gpu`` -- CUDA candidates as job folders for the TVM-free runner on a GPU machine
  (``steptp.gpu_runner``), over a shared folder or TCP.
"""
