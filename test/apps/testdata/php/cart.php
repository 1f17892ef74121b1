<?php
session_start();
if (!isset($_SESSION['user'])) { http_response_code(401); echo "no session\n"; exit; }
echo "cart of {$_SESSION['user']}\n";
