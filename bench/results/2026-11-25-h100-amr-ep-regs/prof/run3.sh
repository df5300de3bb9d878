#!/usr/bin/env bash
# Session 31, device call 4 (binary of split/): per-kernel times with every launch waited for.
source scripts/amr-gpu-lib.sh
IP="--set amr.in_place=true"
sph prof-fixed "$F" ESOFLOW_AMR_PROFILE=1
sph prof-fixed-ip "$F $IP" ESOFLOW_AMR_PROFILE=1
sph prof-adapt-ip "$IP" ESOFLOW_AMR_PROFILE=1
