#!/usr/bin/env bash
# Session 31, device call 2 (repo root, after scripts/stage-quick.sh): the in-place step at launch
# bound 3 with its pushes' sums recomputed, now also without the halo branch in thread blocks
# whose blocks have every neighbour P can fall in (AMR_EP_SPLIT=1, the binary's default) against
# with it (0); cache operators for its slots' loads and stores (AMR_EP_LOAD, AMR_EP_STORE); the
# two-buffer step as the reference. The criterion's block maxima now read the DDFs where the
# steps left them, and an adaptation settles only once it knows the mesh changes (adapting runs,
# both storages; the square cylinder). The GPU tests: run2b.sh.
source scripts/amr-gpu-lib.sh
IP="--set amr.in_place=true"
BIG="--set domain.size=[384,128,128] --set amr.capacity=400000"
sph fixed "$F"
sph fixed-ip "$F $IP"
sph fixed-ip-nosplit "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_SPLIT=0
sph fixed-ip-ld1 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_LOAD=1
sph fixed-ip-ld2 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_LOAD=2
sph fixed-ip-ld3st2 "$F $IP" "ESOFLOW_AMR_DEFINES=AMR_EP_LOAD=3 AMR_EP_STORE=2"
sph fixed-ip-ld4st3 "$F $IP" "ESOFLOW_AMR_DEFINES=AMR_EP_LOAD=4 AMR_EP_STORE=3"
sph fixed16 "$F $H"
sph fixed16-ip "$F $H $IP"
sph fixed16-ip-nosplit "$F $H $IP" ESOFLOW_AMR_DEFINES=AMR_EP_SPLIT=0
sph adapt ""
sph adapt-ip "$IP"
cyl
cyl ip ESOFLOW_AMR_INPLACE=1
sph big-fixed "$F $BIG"
sph big-fixed-ip "$F $BIG $IP"
sph fixed-2 "$F"
sph fixed-ip-2 "$F $IP"
sph fixed-ip-nosplit-2 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_SPLIT=0
