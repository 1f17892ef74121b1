<?php
// The probe's page: it starts no session.
echo "ok\n";
