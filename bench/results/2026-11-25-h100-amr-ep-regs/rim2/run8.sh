#!/usr/bin/env bash
# Session 31, device call 8 (binary of run7.sh): both storages on the sphere, the 8x sphere and
# the square cylinder; then the solver test on the many-block lists.
source scripts/amr-gpu-lib.sh
IP="--set amr.in_place=true"
BIG="--set domain.size=[384,128,128] --set amr.capacity=400000"
sph fixed "$F"
sph fixed-ip "$F $IP"
sph adapt ""
sph adapt-ip "$IP"
sph fixed16 "$F $H"
sph fixed16-ip "$F $H $IP"
sph big-fixed-ip "$F $BIG $IP"
sph big-adapt "$BIG"
sph big-adapt-ip "$BIG $IP"
cyl
cyl ip ESOFLOW_AMR_INPLACE=1
sph fixed-ip-2 "$F $IP"
sph fixed-2 "$F"
