#!/usr/bin/env python3
# The machine's own floor for the grant-latency bench's 16-client cells
# (issue 27; McKenney "Real Time vs Real Fast" §2.1: measure the platform
# first): N processes on CPU 0 each ping-pong one byte with an echo server
# on CPU 0 over a Unix socket, R times, all started together; p50/p99/p999
# of the round trips. Run it with CPU 1 idle and with CPU 1 busy (e.g.
# `taskset -c 1 sh -c 'while :; do :; done' &`) to see whether the host's
# preemption of a busy vCPU reaches the round trips. No root, no rtmgr;
# run it outside a partition (it pins to CPU 0).
#   python3 bench/socket-floor.py [N] [R]
import os, socket, selectors, sys, time, json
N = int(sys.argv[1]) if len(sys.argv) > 1 else 16
R = int(sys.argv[2]) if len(sys.argv) > 2 else 300
os.sched_setaffinity(0,{0})
path = "/tmp/rtmgr-socket-floor-%d.sock" % os.getpid()
try: os.unlink(path)
except OSError: pass
srv=socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(64)
r,w=os.pipe()
kids=[]
start=time.monotonic()+0.3
for i in range(N):
    pid=os.fork()
    if pid==0:
        os.close(r)
        c=socket.socket(socket.AF_UNIX); c.connect(path)
        time.sleep(max(0,start-time.monotonic()))
        out=[]
        for _ in range(R):
            t0=time.monotonic_ns(); c.sendall(b"x\n"); c.recv(16); out.append(time.monotonic_ns()-t0)
        os.write(w,(json.dumps(out)+"\n").encode()); os._exit(0)
    kids.append(pid)
os.close(w)
sel=selectors.DefaultSelector(); sel.register(srv,selectors.EVENT_READ)
done=0; conns=0
os.set_blocking(r,False)
data=b""
while done<N:
    for k,_ in sel.select(0.05):
        if k.fileobj is srv:
            c,_=srv.accept(); sel.register(c,selectors.EVENT_READ)
        else:
            d=k.fileobj.recv(64)
            if not d: sel.unregister(k.fileobj); k.fileobj.close(); done+=1
            else: k.fileobj.sendall(d)
xs=[]
for pid in kids: os.waitpid(pid,0)
for line in os.fdopen(r).read().splitlines(): xs+=json.loads(line)
xs.sort(); q=lambda p: xs[min(len(xs)-1,int(p*len(xs)))]/1e6
print("n %d p50 %.2f p99 %.2f p999 %.2f max %.2f ms" % (len(xs), q(.5), q(.99), q(.999), xs[-1]/1e6))
os.unlink(path)
