<?php
session_start();
$_SESSION['user'] = $_GET['user'] ?? 'someone';
echo "logged in as {$_SESSION['user']}\n";
